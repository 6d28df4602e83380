/* rgpu_replay: replay window, acknowledgements, reply cache, request count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rgpu_frame.h"
#include "rgpu_replay.h"

/* One frame of kind/seq with a payload of len bytes of value fill. */
static size_t frame(uint8_t *out, uint8_t kind, uint64_t seq, uint32_t len, uint8_t fill) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, kind, 0x22, len, 0, seq};
  rgpu_frame_hdr_encode(out, &h);
  memset(out + RGPU_FRAME_HDR_SIZE, fill, len);
  return RGPU_FRAME_HDR_SIZE + len;
}

static void test_replay_from_offset(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 0);
  uint8_t a[256], b[256];
  size_t na = frame(a, RGPU_KIND_REPLY, 5, 100, 0xaa);
  size_t nb = frame(b, RGPU_KIND_EVENT, 0, 50, 0xbb);
  /* header and payload as two iovecs, as the worker sends deferred replies */
  struct iovec ia[2] = {{a, RGPU_FRAME_HDR_SIZE}, {a + RGPU_FRAME_HDR_SIZE, na - RGPU_FRAME_HDR_SIZE}};
  assert_int_equal(rgpu_replay_append(&r, ia, 2), 0);
  struct iovec ib = {b, nb};
  assert_int_equal(rgpu_replay_append(&r, &ib, 1), 0);
  assert_int_equal(r.total, na + nb);

  const uint8_t *p;
  size_t n;
  /* A client that got nothing is missing everything. */
  assert_int_equal(rgpu_replay_from(&r, 0, &p, &n), 0);
  assert_int_equal(n, na + nb);
  assert_memory_equal(p, a, na);
  /* One that got the first frame, only the second. */
  assert_int_equal(rgpu_replay_from(&r, na, &p, &n), 0);
  assert_int_equal(n, nb);
  assert_memory_equal(p, b, nb);
  /* Beyond the stream: refused. */
  assert_int_equal(rgpu_replay_from(&r, na + nb + 1, &p, &n), -1);

  /* After the acknowledgement the first frame is gone for good. */
  rgpu_replay_ack(&r, na);
  assert_int_equal(rgpu_replay_from(&r, 0, &p, &n), -1);
  assert_int_equal(rgpu_replay_from(&r, na, &p, &n), 0);
  assert_int_equal(n, nb);
  /* Bogus acknowledgements change nothing. */
  rgpu_replay_ack(&r, na + nb + 100);
  rgpu_replay_ack(&r, 1);
  assert_int_equal(rgpu_replay_from(&r, na, &p, &n), 0);
  rgpu_replay_free(&r);
}

static void test_reply_cache(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 0);
  uint8_t buf[1024];
  size_t off = 0;
  off += frame(buf + off, RGPU_KIND_EVENT, 0, 10, 1);
  size_t at7 = off;
  size_t n7 = frame(buf + off, RGPU_KIND_REPLY, 7, 20, 7);
  off += n7;
  off += frame(buf + off, RGPU_KIND_REPLY, 9, 30, 9);
  struct iovec io = {buf, off};
  assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
  const uint8_t *p;
  size_t n;
  assert_int_equal(rgpu_replay_find_reply(&r, 7, &p, &n), 0);
  assert_int_equal(n, n7);
  assert_memory_equal(p, buf + at7, n7);
  assert_int_equal(rgpu_replay_find_reply(&r, 8, &p, &n), -1);
  /* Once acknowledged past it, a reply is no longer cached. */
  rgpu_replay_ack(&r, at7 + n7);
  assert_int_equal(rgpu_replay_find_reply(&r, 7, &p, &n), -1);
  assert_int_equal(rgpu_replay_find_reply(&r, 9, &p, &n), 0);
  rgpu_replay_free(&r);
}

static void test_consumed(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 0);
  rgpu_replay_consumed(&r, 24);
  rgpu_replay_consumed(&r, 40);
  assert_int_equal(r.rx_consumed, 64);
  rgpu_replay_free(&r);
}

/* Unacknowledged bytes beyond the bound: the oldest go, and a resume that
 * needs them fails instead of delivering a stream with a hole. */
static void test_bound(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 4096);
  uint8_t f[1100];
  uint64_t total = 0;
  for (int i = 0; i < 10; i++) {
    size_t n = frame(f, RGPU_KIND_REPLY, (uint64_t)i + 1, 1000, (uint8_t)i);
    struct iovec io = {f, n};
    assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
    total += n;
  }
  assert_int_equal(r.total, total);
  assert_true(r.len <= 4096);
  assert_true(r.dropped_unacked > 0);
  const uint8_t *p;
  size_t n;
  assert_int_equal(rgpu_replay_from(&r, 0, &p, &n), -1);
  assert_int_equal(rgpu_replay_from(&r, total - 1024, &p, &n), 0);
  assert_int_equal(n, 1024);
  assert_int_equal(p[0], 'R'); /* the last frame's header starts with the magic */
  assert_int_equal(rgpu_replay_find_reply(&r, 1, &p, &n), -1);
  assert_int_equal(rgpu_replay_find_reply(&r, 10, &p, &n), 0);
  /* A group larger than the whole bound is counted but not kept. */
  uint8_t *big = calloc(1, 8192);
  size_t nbig = frame(big, RGPU_KIND_REPLY, 11, 8000, 0);
  struct iovec io = {big, nbig};
  assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
  assert_int_equal(r.total, total + nbig);
  assert_int_equal(rgpu_replay_from(&r, total, &p, &n), -1);
  assert_int_equal(rgpu_replay_from(&r, total + nbig, &p, &n), 0);
  assert_int_equal(n, 0);
  free(big);
  rgpu_replay_free(&r);
}

/* Resume off: nothing kept, only the counter runs. */
static void test_disabled(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 0, 0);
  uint8_t f[64];
  size_t n = frame(f, RGPU_KIND_REPLY, 1, 8, 0);
  struct iovec io = {f, n};
  assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
  assert_int_equal(r.total, n);
  assert_int_equal(r.nsegs, 0);
  const uint8_t *p;
  size_t got;
  assert_int_equal(rgpu_replay_from(&r, 0, &p, &got), -1);
  rgpu_replay_free(&r);
}

/* Many small acknowledged appends keep the buffer small. */
static void test_steady_state(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 1u << 20);
  uint8_t f[4200];
  for (int i = 0; i < 5000; i++) {
    size_t n = frame(f, RGPU_KIND_REPLY, (uint64_t)i + 1, 4096, (uint8_t)i);
    struct iovec io = {f, n};
    assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
    if (i % 4 == 3) rgpu_replay_ack(&r, r.total);
  }
  assert_int_equal(r.dropped_unacked, 0);
  assert_true(r.cap <= 3 * RGPU_REPLAY_BLOCK); /* the live block and two spares */
  assert_true(r.nidx <= 4);
  rgpu_replay_free(&r);
}

/* A client that stops acknowledging keeps the buffer full: the newest
 * bytes stay replayable and memory stays bounded (blocks are dropped
 * whole, nothing is compacted). */
static void test_full_unacked(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 1u << 20);
  uint8_t f[4200];
  size_t n = 0;
  for (int i = 0; i < 2000; i++) {
    n = frame(f, RGPU_KIND_REPLY, (uint64_t)i + 1, 4096, (uint8_t)i);
    struct iovec io = {f, n};
    assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
    assert_true(r.len <= (1u << 20));
    assert_true(r.cap <= 4 * RGPU_REPLAY_BLOCK);
  }
  assert_true(r.dropped_unacked > 0);
  const uint8_t *p = NULL;
  size_t got = 0;
  assert_int_equal(rgpu_replay_from(&r, r.total - n, &p, &got), 0);
  assert_int_equal(got, n);
  assert_memory_equal(p, f, n);
  rgpu_replay_free(&r);
}

typedef struct {
  int released;
  void *last;
} release_log;

static void note_release(void *ctx, void *buf) {
  release_log *l = ctx;
  l->released++;
  l->last = buf;
}

/* A payload kept by reference: replayable byte-exact next to copied
 * frames (a resume flattens them), given back once acknowledged, and given
 * back at once when nothing is kept. */
static void test_append_ref(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 0);
  release_log l = {0, NULL};
  uint8_t small[64];
  size_t ns = frame(small, RGPU_KIND_EVENT, 0, 20, 0x11);
  struct iovec is = {small, ns};
  assert_int_equal(rgpu_replay_append(&r, &is, 1), 0);
  size_t plen = 300000;
  uint8_t *payload = malloc(plen);
  for (size_t i = 0; i < plen; i++) payload[i] = (uint8_t)(i * 7);
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, 0x22, (uint32_t)plen, 0, 42};
  rgpu_frame_hdr_encode(hdr, &h);
  struct iovec io[2] = {{hdr, sizeof hdr}, {payload, plen}};
  assert_int_equal(rgpu_replay_append_ref(&r, io, 2, 1, note_release, &l, payload), 0);
  assert_int_equal(l.released, 0);
  assert_int_equal(r.kept_by_ref, plen);
  assert_int_equal(rgpu_replay_append(&r, &is, 1), 0);

  const uint8_t *p;
  size_t n;
  assert_int_equal(rgpu_replay_from(&r, 0, &p, &n), 0);
  assert_int_equal(n, 2 * ns + sizeof hdr + plen);
  assert_memory_equal(p, small, ns);
  assert_memory_equal(p + ns, hdr, sizeof hdr);
  assert_memory_equal(p + ns + sizeof hdr, payload, plen);
  assert_memory_equal(p + ns + sizeof hdr + plen, small, ns);
  assert_int_equal(rgpu_replay_find_reply(&r, 42, &p, &n), 0);
  assert_int_equal(n, sizeof hdr + plen);
  assert_memory_equal(p + sizeof hdr, payload, plen);
  /* Acknowledged up to the middle of the payload: still kept. */
  rgpu_replay_ack(&r, ns + sizeof hdr + plen / 2);
  assert_int_equal(l.released, 0);
  assert_int_equal(rgpu_replay_from(&r, ns + sizeof hdr + plen / 2, &p, &n), 0);
  assert_memory_equal(p, payload + plen / 2, plen - plen / 2);
  /* Past it: released, exactly once. */
  rgpu_replay_ack(&r, ns + sizeof hdr + plen);
  assert_int_equal(l.released, 1);
  assert_ptr_equal(l.last, payload);
  free(payload);
  rgpu_replay_free(&r);
  assert_int_equal(l.released, 1);

  /* Resume off: released at once. */
  rgpu_replay_init(&r, 0, 0);
  uint8_t *p2 = malloc(16);
  struct iovec i2[2] = {{hdr, sizeof hdr}, {p2, 16}};
  assert_int_equal(rgpu_replay_append_ref(&r, i2, 2, 1, note_release, &l, p2), 0);
  assert_int_equal(l.released, 2);
  free(p2);
  rgpu_replay_free(&r);

  /* Evicted at the bound before any acknowledgement: released too. */
  rgpu_replay_init(&r, 1, 4096);
  uint8_t *p3 = malloc(2000);
  rgpu_frame_hdr h3 = {RGPU_PROTO_VERSION, RGPU_KIND_REPLY, 0x22, 2000, 0, 43};
  rgpu_frame_hdr_encode(hdr, &h3);
  struct iovec i3[2] = {{hdr, sizeof hdr}, {p3, 2000}};
  assert_int_equal(rgpu_replay_append_ref(&r, i3, 2, 1, note_release, &l, p3), 0);
  uint8_t f[4100];
  size_t nf = frame(f, RGPU_KIND_REPLY, 44, 4096 - RGPU_FRAME_HDR_SIZE, 1); /* the whole bound */
  struct iovec iff = {f, nf};
  assert_int_equal(rgpu_replay_append(&r, &iff, 1), 0);
  assert_int_equal(l.released, 3);
  free(p3);
  rgpu_replay_free(&r);
}

/* After one large reply is acknowledged, its memory is given back. */
static void test_shrink_after_large(void **state) {
  (void)state;
  rgpu_replay r;
  rgpu_replay_init(&r, 1, 0);
  size_t n = 40u << 20;
  uint8_t *big = calloc(1, n + RGPU_FRAME_HDR_SIZE);
  size_t len = frame(big, RGPU_KIND_REPLY, 3, (uint32_t)n, 7);
  struct iovec io = {big, len};
  assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
  assert_true(r.cap >= len);
  rgpu_replay_ack(&r, r.total);
  assert_int_equal(r.nsegs, 0);
  assert_int_equal(r.cap, 0);
  /* and the stream goes on */
  assert_int_equal(rgpu_replay_append(&r, &io, 1), 0);
  const uint8_t *p;
  size_t got;
  assert_int_equal(rgpu_replay_from(&r, len, &p, &got), 0);
  assert_int_equal(got, len);
  assert_memory_equal(p, big, len);
  free(big);
  rgpu_replay_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_from_offset), cmocka_unit_test(test_reply_cache),
      cmocka_unit_test(test_consumed),         cmocka_unit_test(test_bound),
      cmocka_unit_test(test_disabled),           cmocka_unit_test(test_steady_state),
      cmocka_unit_test(test_full_unacked), cmocka_unit_test(test_append_ref), cmocka_unit_test(test_shrink_after_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
