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

/* Chunk allocations fail while this is set (the test links with
 * -Wl,--wrap=malloc, so the resend buffer's malloc comes here). */
static int g_fail_chunks;
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n) {
  if (g_fail_chunks && n == RGPU_RESEND_CHUNK_BYTES) return NULL;
  return __real_malloc(n);
}

static size_t frame(uint8_t *out, uint64_t seq, uint32_t len, uint8_t fill) {
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, 0x22, len, 0, seq};
  rgpu_frame_hdr_encode(out, &h);
  memset(out + RGPU_FRAME_HDR_SIZE, fill, len);
  return RGPU_FRAME_HDR_SIZE + len;
}

/* rgpu_resend_from, with the bytes to re-send gathered from the chunks
 * into one malloc'd block (*p, NULL when none), a few iovecs at a time as
 * the resume path writes them. */
static int resend_from(rgpu_resend_buf *b, uint64_t off, uint8_t **p, size_t *n,
                       size_t *frames) {
  *p = NULL;
  int rc = rgpu_resend_from(b, off, n, frames);
  if (rc || *n == 0) return rc;
  *p = malloc(*n);
  assert_non_null(*p);
  size_t done = 0;
  while (done < *n) {
    struct iovec io[3];
    int k = rgpu_resend_iov(b, done, io, 3);
    assert_true(k > 0);
    for (int i = 0; i < k; i++) {
      assert_true(io[i].iov_len > 0);
      memcpy(*p + done, io[i].iov_base, io[i].iov_len);
      done += io[i].iov_len;
    }
  }
  assert_int_equal(done, *n);
  assert_int_equal(rgpu_resend_iov(b, done, (struct iovec[1]){{0}}, 1), 0);
  return 0;
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
  uint8_t *p = NULL;
  size_t n, frames;
  /* The server executed the first two frames: resend from the third. */
  assert_int_equal(resend_from(&b, ends[1], &p, &n, &frames), 0);
  assert_int_equal(n, ends[3] - ends[1]);
  assert_int_equal(frames, 2);
  assert_memory_equal(p, buf + ends[1], n);
  free(p);
  /* Executed everything: nothing to resend. */
  assert_int_equal(resend_from(&b, ends[3], &p, &n, &frames), 0);
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
  uint8_t *p = NULL;
  size_t n, frames;
  /* The server cannot have executed less than it confirmed, nor more than
   * was sent: both mean the session cannot be resumed. */
  assert_int_equal(resend_from(&b, ends[0], &p, &n, &frames), -1);
  assert_int_equal(resend_from(&b, ends[3] + 1, &p, &n, &frames), -1);
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
  uint8_t *p = NULL;
  size_t n, frames;
  assert_int_equal(resend_from(&b, n1, &p, &n, &frames), 0);
  assert_int_equal(n, n2);
  assert_memory_equal(p, f2, n2);
  free(p);
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
  /* One chunk in use at a time, the next taken from the spares: no
   * allocation after the first two. */
  assert_true(b.nchunk + b.nspare <= 2);
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
  uint8_t *p = NULL;
  size_t n, frames;
  assert_int_equal(resend_from(&b, b.base, &p, &n, &frames), 0);
  assert_int_equal(frames, WINDOW);
  assert_int_equal(n, (size_t)WINDOW * (RGPU_FRAME_HDR_SIZE + 16));
  rgpu_frame_hdr h;
  assert_int_equal(rgpu_frame_hdr_decode(p, 1 << 20, &h), 0);
  assert_int_equal(h.seq, FRAMES - WINDOW + 1);
  free(p);
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
  struct iovec dst[RGPU_COPIER_MAX_SEGS];
  int ndst = 0;
  assert_int_equal(rgpu_resend_append_aside(&b, io, 2, 1, dst, RGPU_COPIER_MAX_SEGS, &ndst), 0);
  /* 3 MiB after a 24-byte header: four chunks, the first and last partly. */
  assert_int_equal(ndst, 4);
  rgpu_copier *cp = rgpu_copier_new();
  assert_non_null(cp);
  rgpu_copier_start(cp, dst, ndst, io[1].iov_base);
  rgpu_copier_wait(cp);
  uint8_t *p = NULL;
  size_t got, frames;
  assert_int_equal(resend_from(&b, 0, &p, &got, &frames), 0);
  assert_int_equal(got, n);
  assert_int_equal(frames, 1);
  assert_memory_equal(p, buf, n);
  free(p);
  /* The copier takes the next copy, and frees cleanly. */
  rgpu_copier_start(cp, dst, 1, buf + RGPU_FRAME_HDR_SIZE);
  rgpu_copier_free(cp);
  rgpu_resend_confirm(&b, 9);
  assert_int_equal(rgpu_resend_held(&b), 0);
  free(buf);
  rgpu_resend_free(&b);
}

/* Payloads kept by reference: small frames, then two bulk frames whose
 * payloads stay the program's memory.  A replay from the middle of the
 * first bulk payload gives the program's bytes; rgpu_resend_own copies
 * them in, so the program's buffer may then change without changing the
 * replay; a confirmation drops the references with their frames. */
static void test_append_by_reference(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t small[256];
  size_t ns = frame(small, 1, 40, 0x11);
  struct iovec io0 = {small, ns};
  assert_int_equal(rgpu_resend_append(&b, &io0, 1), 0);
  size_t plen = (3u << 20) + 77; /* spans chunks, ends mid-chunk */
  uint8_t *pin1 = malloc(plen), *pin2 = malloc(plen);
  for (size_t i = 0; i < plen; i++) pin1[i] = (uint8_t)(i * 7), pin2[i] = (uint8_t)(i * 11 + 3);
  uint8_t h1[RGPU_FRAME_HDR_SIZE], h2[RGPU_FRAME_HDR_SIZE];
  rgpu_frame_hdr h = {RGPU_PROTO_VERSION, RGPU_KIND_REQUEST, 0x22, (uint32_t)plen, 0, 2};
  rgpu_frame_hdr_encode(h1, &h);
  h.seq = 3;
  rgpu_frame_hdr_encode(h2, &h);
  struct iovec io1[2] = {{h1, sizeof h1}, {pin1, plen}}, io2[2] = {{h2, sizeof h2}, {pin2, plen}};
  assert_int_equal(rgpu_resend_append_ref(&b, io1, 2, 1), 0);
  assert_int_equal(rgpu_resend_append_ref(&b, io2, 2, 1), 0);
  assert_int_equal(b.nref, 2);
  size_t total = ns + 2 * (sizeof h1 + plen);
  assert_int_equal(rgpu_resend_held(&b), total);
  /* The whole stream, as it went on the wire. */
  uint8_t *want = malloc(total);
  memcpy(want, small, ns);
  memcpy(want + ns, h1, sizeof h1);
  memcpy(want + ns + sizeof h1, pin1, plen);
  memcpy(want + ns + sizeof h1 + plen, h2, sizeof h2);
  memcpy(want + ns + 2 * sizeof h1 + plen, pin2, plen);
  /* Replay from inside the first payload (the server had read part of it). */
  uint64_t off = ns + sizeof h1 + 12345;
  uint8_t *p = NULL;
  size_t got, frames;
  assert_int_equal(resend_from(&b, off, &p, &got, &frames), 0);
  assert_int_equal(got, total - off);
  assert_int_equal(frames, 2);
  assert_memory_equal(p, want + off, got);
  free(p);
  /* The program releases its first buffer: the held part is copied in. */
  rgpu_resend_own(&b, pin1 + 100, 10);
  assert_int_equal(b.nref, 1);
  memset(pin1, 0xee, plen);
  assert_int_equal(resend_from(&b, off, &p, &got, &frames), 0);
  assert_memory_equal(p, want + off, got);
  free(p);
  /* Releasing memory no reference points into changes nothing. */
  rgpu_resend_own(&b, small, sizeof small);
  assert_int_equal(b.nref, 1);
  /* Confirming the last frame drops everything, the reference too. */
  rgpu_resend_confirm(&b, 3);
  assert_int_equal(rgpu_resend_held(&b), 0);
  assert_int_equal(b.nref, 0);
  free(want);
  free(pin1);
  free(pin2);
  rgpu_resend_free(&b);
}

/* Deterministic pseudo-random numbers (xorshift), so a failure repeats. */
static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* The held bytes and frame count match the model of the whole stream. */
static void check_replay(rgpu_resend_buf *b, const uint8_t *stream, const uint64_t *ends,
                         const uint64_t *seqs, size_t nframes, uint64_t off) {
  uint8_t *p = NULL;
  size_t n, frames;
  assert_int_equal(resend_from(b, off, &p, &n, &frames), 0);
  assert_int_equal(n, b->total - off);
  if (n) assert_memory_equal(p, stream + off, n);
  free(p);
  size_t want = 0;
  for (size_t i = 0; i < nframes; i++)
    if (ends[i] > off && seqs[i]) want++;
  assert_int_equal(frames, want);
}

/* A long random stream through the chunk ring: small frames batched in one
 * iovec, bulk frames with the payload aside (filled through the segments
 * like the copier does), frames spanning chunks, confirmations of a random
 * unconfirmed frame (often in the middle of a chunk), and now and then a
 * replay from a frame boundary past the confirmed part.  Every replay must
 * give back exactly the stream's bytes, and the ring must recycle its
 * chunks (wrap around) instead of growing. */
static void test_ring_random_stream(void **state) {
  (void)state;
  enum { STREAM = 48 << 20, MAXF = 20000 };
  uint8_t *stream = malloc(STREAM);
  uint64_t *ends = calloc(MAXF, sizeof *ends), *seqs = calloc(MAXF, sizeof *seqs);
  assert_non_null(stream);
  assert_non_null(ends);
  assert_non_null(seqs);
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint64_t r = 0x9e3779b97f4a7c15ull, seq = 1;
  size_t nf = 0, first_unconfirmed = 0, replays = 0, spans = 0, asides = 0, most_chunks = 0,
         refs = 0;
  uint64_t off = 0;
  while (nf + 8 < MAXF) {
    uint64_t kind = rnd(&r) % 10;
    if (kind < 6) { /* a batch of 1..6 small frames in one iovec */
      size_t k = 1 + rnd(&r) % 6, start = off, room = STREAM - off;
      if (room < 6 * (RGPU_FRAME_HDR_SIZE + 9000)) break;
      for (size_t i = 0; i < k; i++) {
        uint32_t len = (uint32_t)(rnd(&r) % 9000);
        /* sequence 0 now and then: a frame that is never confirmed by
         * its own reply (ACK-like), only by later ones */
        uint64_t s = rnd(&r) % 7 ? seq++ : 0;
        off += frame(stream + off, s, len, (uint8_t)rnd(&r));
        ends[nf] = off;
        seqs[nf++] = s;
      }
      struct iovec io = {stream + start, off - start};
      assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
    } else if (kind < 9) { /* bulk: header and fixed part, payload aside */
      uint32_t len = (uint32_t)(1 + rnd(&r) % (3u << 19));
      if (STREAM - off < (uint64_t)len + 64) break;
      size_t start = off;
      uint64_t s = seq++;
      off += frame(stream + off, s, len, 0);
      for (uint32_t i = 0; i < len; i += 4096) stream[start + RGPU_FRAME_HDR_SIZE + i] = (uint8_t)rnd(&r);
      ends[nf] = off;
      seqs[nf++] = s;
      /* As send_frame writes it: header, fixed part, bulk data. */
      struct iovec io[3] = {{stream + start, RGPU_FRAME_HDR_SIZE + len}};
      int nio = 1;
      if (len >= 8) {
        io[0].iov_len = RGPU_FRAME_HDR_SIZE;
        io[1] = (struct iovec){stream + start + RGPU_FRAME_HDR_SIZE, 8};
        io[2] = (struct iovec){stream + start + RGPU_FRAME_HDR_SIZE + 8, len - 8};
        nio = 3;
      }
      struct iovec dst[RGPU_COPIER_MAX_SEGS];
      int ndst = 0;
      if (nio == 3 && rnd(&r) % 3 == 0) {
        /* By reference (the model stream stays as it is), and now and
         * then taken back in at once, as cudaFreeHost does. */
        assert_int_equal(rgpu_resend_append_ref(&b, io, nio, 2), 0);
        refs++;
        if (rnd(&r) % 4 == 0) rgpu_resend_own(&b, io[2].iov_base, 1);
        goto appended;
      }
      assert_int_equal(rgpu_resend_append_aside(&b, io, nio, nio - 1, dst, RGPU_COPIER_MAX_SEGS, &ndst), 0);
      if (nio == 3) {
        assert_true(ndst >= 1);
        if (ndst > 1) spans++;
        asides++;
        const uint8_t *src = io[2].iov_base;
        size_t sum = 0;
        for (int i = 0; i < ndst; i++) {
          memcpy(dst[i].iov_base, src + sum, dst[i].iov_len);
          sum += dst[i].iov_len;
        }
        assert_int_equal(sum, io[2].iov_len);
      }
    appended:;
    } else if (first_unconfirmed < nf) { /* confirm a random unconfirmed frame */
      size_t i = first_unconfirmed + rnd(&r) % (nf - first_unconfirmed);
      while (i < nf && !seqs[i]) i++;
      if (i < nf) {
        rgpu_resend_confirm(&b, seqs[i]);
        assert_int_equal(b.base, ends[i]);
        first_unconfirmed = i + 1;
      }
    }
    assert_int_equal(b.total, off);
    /* The ring holds the held bytes and at most a partial chunk at each
     * end. */
    assert_true(b.nchunk <= rgpu_resend_held(&b) / RGPU_RESEND_CHUNK_BYTES + 2);
    assert_true(b.nspare <= RGPU_RESEND_SPARE_CHUNKS);
    if (b.nchunk + b.nspare > most_chunks) most_chunks = b.nchunk + b.nspare;
    /* Keep the window bounded like resend_checkpoint does. */
    if (rgpu_resend_held(&b) > (8u << 20) && first_unconfirmed < nf) {
      size_t i = nf - 1 - rnd(&r) % 3;
      if (i < first_unconfirmed) i = first_unconfirmed;
      while (i < nf && !seqs[i]) i++;
      if (i < nf) {
        rgpu_resend_confirm(&b, seqs[i]);
        first_unconfirmed = i + 1;
      }
    }
    if (rnd(&r) % 10 == 0 && first_unconfirmed < nf) {
      /* The server ran a few more frames than it confirmed: replay. */
      size_t i = first_unconfirmed + rnd(&r) % (nf - first_unconfirmed);
      check_replay(&b, stream, ends, seqs, nf, ends[i]);
      first_unconfirmed = i + 1;
      replays++;
    }
    if (off > STREAM - (4u << 20)) break;
  }
  check_replay(&b, stream, ends, seqs, nf, b.base);
  assert_true(replays > 5);
  assert_true(spans > 5);
  assert_true(asides > 5);
  assert_true(refs > 5);
  /* The stream went round the chunks it ever had several times. */
  assert_true(b.total > 3u * most_chunks * RGPU_RESEND_CHUNK_BYTES);
  assert_int_equal(b.oom, 0);
  rgpu_resend_free(&b);
  free(stream);
  free(ends);
  free(seqs);
}

/* Confirming a frame that ends in the middle of a chunk keeps that chunk
 * (its tail holds later frames); chunks wholly before the confirmed point
 * go to the spares, and are reused before anything new is allocated. */
static void test_confirm_mid_chunk(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  enum { LEN = 100000, N = 30 };
  uint8_t *all = malloc((size_t)N * (RGPU_FRAME_HDR_SIZE + LEN));
  size_t off = 0, ends[N];
  for (int i = 0; i < N; i++) {
    size_t start = off;
    off += frame(all + off, (uint64_t)i + 1, LEN, (uint8_t)(i + 1));
    ends[i] = off;
    struct iovec io = {all + start, off - start};
    assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
  }
  assert_int_equal(b.nchunk, (off + RGPU_RESEND_CHUNK_BYTES - 1) / RGPU_RESEND_CHUNK_BYTES);
  /* Frame 15 ends at 1500360: in the second chunk. */
  rgpu_resend_confirm(&b, 15);
  assert_int_equal(b.base, ends[14]);
  assert_int_equal(b.origin, RGPU_RESEND_CHUNK_BYTES);
  assert_int_equal(b.nspare, 1);
  uint8_t *p = NULL;
  size_t n, frames;
  assert_int_equal(resend_from(&b, ends[14], &p, &n, &frames), 0);
  assert_int_equal(n, off - ends[14]);
  assert_int_equal(frames, N - 15);
  assert_memory_equal(p, all + ends[14], n);
  free(p);
  /* Replay from later (the server ran three more than it confirmed). */
  assert_int_equal(resend_from(&b, ends[17], &p, &n, &frames), 0);
  assert_int_equal(frames, N - 18);
  assert_memory_equal(p, all + ends[17], n);
  free(p);
  size_t chunks = b.nchunk + b.nspare;
  rgpu_resend_confirm(&b, N);
  assert_int_equal(rgpu_resend_held(&b), 0);
  /* The next append continues in the partly used last chunk or a spare. */
  struct iovec io = {all, ends[0]};
  assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
  assert_int_equal(b.nchunk + b.nspare, chunks);
  assert_int_equal(resend_from(&b, off, &p, &n, &frames), 0);
  assert_int_equal(n, ends[0]);
  assert_memory_equal(p, all, n);
  free(p);
  free(all);
  rgpu_resend_free(&b);
}

/* Out of memory for a chunk: the frames cannot be kept, so everything held
 * is dropped and oom stays set (a resume then fails instead of losing a
 * request); the stream count still advances, and an aside gets no place. */
static void test_oom(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  uint8_t small[256];
  size_t n1 = frame(small, 1, 100, 1);
  struct iovec io = {small, n1};
  assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
  size_t plen = 2u << 20;
  uint8_t *big = malloc(RGPU_FRAME_HDR_SIZE + plen);
  size_t n2 = frame(big, 2, (uint32_t)plen, 2);
  struct iovec io2[2] = {{big, RGPU_FRAME_HDR_SIZE}, {big + RGPU_FRAME_HDR_SIZE, plen}};
  struct iovec dst[RGPU_COPIER_MAX_SEGS];
  int ndst = 7;
  g_fail_chunks = 1;
  assert_int_equal(rgpu_resend_append_aside(&b, io2, 2, 1, dst, RGPU_COPIER_MAX_SEGS, &ndst), -1);
  g_fail_chunks = 0;
  assert_int_equal(ndst, 0);
  assert_int_equal(b.oom, 1);
  assert_int_equal(b.total, n1 + n2);
  assert_int_equal(rgpu_resend_held(&b), 0);
  assert_int_equal(b.nidx, 0);
  uint8_t *p = NULL;
  size_t n, frames;
  /* What the server has not run cannot come back. */
  assert_int_equal(resend_from(&b, n1, &p, &n, &frames), -1);
  assert_int_equal(resend_from(&b, n1 + n2, &p, &n, &frames), 0);
  assert_int_equal(n, 0);
  /* Later frames are kept again (the session still cannot resume: oom). */
  size_t n3 = frame(small, 3, 50, 3);
  io.iov_len = n3;
  assert_int_equal(rgpu_resend_append(&b, &io, 1), 0);
  assert_int_equal(rgpu_resend_held(&b), n3);
  assert_int_equal(b.oom, 1);
  assert_int_equal(resend_from(&b, n1 + n2, &p, &n, &frames), 0);
  assert_int_equal(n, n3);
  assert_int_equal(frames, 1);
  assert_memory_equal(p, small, n3);
  free(p);
  free(big);
  rgpu_resend_free(&b);
}

/* A payload that would take more places than the caller can take is
 * copied by the buffer itself. */
static void test_aside_too_many_segments(void **state) {
  (void)state;
  rgpu_resend_buf b;
  rgpu_resend_init(&b);
  size_t plen = 3u << 20;
  uint8_t *buf = malloc(RGPU_FRAME_HDR_SIZE + plen);
  size_t n = frame(buf, 5, (uint32_t)plen, 0x77);
  struct iovec io[2] = {{buf, RGPU_FRAME_HDR_SIZE}, {buf + RGPU_FRAME_HDR_SIZE, plen}};
  struct iovec dst[2];
  int ndst = 9;
  assert_int_equal(rgpu_resend_append_aside(&b, io, 2, 1, dst, 2, &ndst), 0);
  assert_int_equal(ndst, 0);
  uint8_t *p = NULL;
  size_t got, frames;
  assert_int_equal(resend_from(&b, 0, &p, &got, &frames), 0);
  assert_int_equal(got, n);
  assert_int_equal(frames, 1);
  assert_memory_equal(p, buf, n);
  free(p);
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
      cmocka_unit_test(test_append_by_reference),
      cmocka_unit_test(test_ring_random_stream),
      cmocka_unit_test(test_confirm_mid_chunk),
      cmocka_unit_test(test_oom),
      cmocka_unit_test(test_aside_too_many_segments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
