/* The client's resend buffer: see rgpu_client_resume.h. */
#include "rgpu_client_resume.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_frame.h"

#define CHUNK ((size_t)RGPU_RESEND_CHUNK_BYTES)

void rgpu_resend_init(rgpu_resend_buf *b) { memset(b, 0, sizeof *b); }

static void chunk_release(rgpu_resend_buf *b, uint8_t *ch) {
  if (b->nspare < RGPU_RESEND_SPARE_CHUNKS)
    b->spare[b->nspare++] = ch;
  else
    free(ch);
}

static uint8_t *chunk_get(rgpu_resend_buf *b) {
  if (b->nspare) return b->spare[--b->nspare];
  return malloc(CHUNK);
}

void rgpu_resend_free(rgpu_resend_buf *b) {
  for (size_t i = 0; i < b->nchunk; i++) free(b->chunk[b->chunk_head + i]);
  free(b->chunk);
  for (size_t i = 0; i < b->nspare; i++) free(b->spare[i]);
  free(b->idx);
  free(b->ref);
  memset(b, 0, sizeof *b);
}

/* Every chunk goes back; the (empty) stream goes on at `total`. */
static void release_all(rgpu_resend_buf *b) {
  for (size_t i = 0; i < b->nchunk; i++) chunk_release(b, b->chunk[b->chunk_head + i]);
  b->chunk_head = b->nchunk = 0;
  b->origin = b->base = b->total;
  b->idx_head = b->nidx = 0;
  b->ref_head = b->nref = 0;
}

static void drop_to(rgpu_resend_buf *b, uint64_t off) {
  if (off <= b->base) return;
  if (off > b->total) off = b->total;
  b->base = off;
  /* Only whole chunks go: the one holding base stays (its start is the
   * confirmed tail of an older frame). */
  while (b->nchunk && b->origin + CHUNK <= b->base) {
    chunk_release(b, b->chunk[b->chunk_head]);
    b->chunk_head++;
    b->nchunk--;
    b->origin += CHUNK;
  }
  if (b->nchunk == 0) b->chunk_head = 0;
  while (b->nidx && b->idx[b->idx_head].end <= b->base) {
    b->idx_head++;
    b->nidx--;
  }
  if (b->nidx == 0) b->idx_head = 0;
  while (b->nref && b->ref[b->ref_head].off + b->ref[b->ref_head].len <= b->base) {
    b->ref_head++;
    b->nref--;
  }
  if (b->nref == 0) b->ref_head = 0;
}

/* The frame index is an array FIFO: confirmations take from the front
 * (idx_head), appends push at the back. */
static int index_push(rgpu_resend_buf *b, uint64_t seq, uint64_t end) {
  if (RGPU_ARRAY_QUEUE_ROOM(b->idx, b->idx_head, b->nidx, b->idx_cap, 256)) return -1;
  b->idx[b->idx_head + b->nidx++] = (rgpu_resend_frame){seq, end};
  return 0;
}

/* Describes stream bytes [off, off + n), which lie in the chunks, in up to
 * max iovecs; returns how many, with *covered the bytes they hold. */
static int segments(const rgpu_resend_buf *b, uint64_t off, size_t n, struct iovec *iov, int max,
                    size_t *covered) {
  size_t p = (size_t)(off - b->origin), done = 0;
  int k = 0;
  while (done < n && k < max) {
    size_t in = p % CHUNK, m = CHUNK - in;
    if (m > n - done) m = n - done;
    iov[k].iov_base = b->chunk[b->chunk_head + p / CHUNK] + in;
    iov[k].iov_len = m;
    k++;
    done += m;
    p += m;
  }
  *covered = done;
  return k;
}

/* Copies n bytes to stream offset off (inside the chunks). */
static void put(const rgpu_resend_buf *b, uint64_t off, const uint8_t *src, size_t n) {
  while (n) {
    struct iovec seg;
    size_t m;
    segments(b, off, n, &seg, 1, &m);
    memcpy(seg.iov_base, src, m);
    src += m;
    off += m;
    n -= m;
  }
}

/* Decodes the frame header at byte pos of the concatenation of iov[0..n)
 * (a header may be split between iovecs). */
static int header_at(const struct iovec *iov, int n, size_t pos, rgpu_frame_hdr *h) {
  uint8_t raw[RGPU_FRAME_HDR_SIZE];
  size_t got = 0;
  int i = 0;
  while (i < n && pos >= iov[i].iov_len) pos -= iov[i++].iov_len;
  for (; i < n && got < sizeof raw; i++, pos = 0) {
    size_t m = iov[i].iov_len - pos;
    if (m > sizeof raw - got) m = sizeof raw - got;
    memcpy(raw + got, (const uint8_t *)iov[i].iov_base + pos, m);
    got += m;
  }
  if (got < sizeof raw) return -1;
  return rgpu_frame_hdr_decode(raw, (size_t)-1, h);
}

static int append(rgpu_resend_buf *b, const struct iovec *iov, int n, int aside,
                  struct iovec *dst, int maxdst, int *ndst, int by_ref);

int rgpu_resend_append(rgpu_resend_buf *b, const struct iovec *iov, int n) {
  return append(b, iov, n, -1, NULL, 0, NULL, 0);
}

int rgpu_resend_append_aside(rgpu_resend_buf *b, const struct iovec *iov, int n, int aside,
                             struct iovec *dst, int maxdst, int *ndst) {
  return append(b, iov, n, aside, dst, maxdst, ndst, 0);
}

int rgpu_resend_append_ref(rgpu_resend_buf *b, const struct iovec *iov, int n, int ref) {
  return append(b, iov, n, ref, NULL, 0, NULL, 1);
}

/* iov[aside]: with by_ref kept by reference, else (dst given) left for
 * the caller to copy into dst, else copied here. */
static int append(rgpu_resend_buf *b, const struct iovec *iov, int n, int aside,
                  struct iovec *dst, int maxdst, int *ndst, int by_ref) {
  if (ndst) *ndst = 0;
  size_t nb = 0;
  for (int i = 0; i < n; i++) nb += iov[i].iov_len;
  if (nb == 0) return 0;
  /* Every chunk the frames need, before a byte is written: out of memory
   * then leaves nothing half-kept. */
  uint64_t start = b->total;
  size_t need = (size_t)((start - b->origin + nb + CHUNK - 1) / CHUNK);
  while (b->nchunk < need) {
    uint8_t *ch = NULL;
    if (RGPU_ARRAY_QUEUE_ROOM(b->chunk, b->chunk_head, b->nchunk, b->chunk_cap, 64) ||
        !(ch = chunk_get(b))) {
      /* Nothing before this can be re-sent any more. */
      b->oom = 1;
      b->total += nb;
      release_all(b);
      return -1;
    }
    b->chunk[b->chunk_head + b->nchunk++] = ch;
  }
  uint64_t off = start;
  for (int i = 0; i < n; i++) {
    size_t len = iov[i].iov_len;
    size_t covered = 0;
    int k = 0;
    if (i == aside && by_ref && len) {
      if (RGPU_ARRAY_QUEUE_ROOM(b->ref, b->ref_head, b->nref, b->ref_cap, 16)) {
        put(b, off, iov[i].iov_base, len); /* no room for the note: a copy */
      } else {
        b->ref[b->ref_head + b->nref++] =
            (rgpu_resend_ref){.off = off, .len = len, .ptr = iov[i].iov_base};
      }
      off += len;
      continue;
    }
    if (i == aside && dst && ndst) k = segments(b, off, len, dst, maxdst, &covered);
    if (covered == len && k > 0)
      *ndst = k; /* the caller fills it (no frame header lies inside a tail) */
    else
      put(b, off, iov[i].iov_base, len);
    off += len;
  }
  b->total += nb;
  /* Index from the caller's iovecs: the same bytes, and an aside payload
   * is not in the chunks yet (no header lies in one anyway). */
  uint64_t end = start;
  size_t pos = 0;
  int rc = 0;
  while (pos + RGPU_FRAME_HDR_SIZE <= nb) {
    rgpu_frame_hdr h;
    if (header_at(iov, n, pos, &h) != 0) break;
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    end += flen;
    pos += flen;
    if (h.seq && index_push(b, h.seq, end)) {
      b->oom = 1;
      rc = -1;
    }
  }
  return rc;
}

void rgpu_resend_confirm(rgpu_resend_buf *b, uint64_t seq) {
  if (!seq) return;
  for (size_t i = 0; i < b->nidx; i++)
    if (b->idx[b->idx_head + i].seq == seq) {
      drop_to(b, b->idx[b->idx_head + i].end);
      return;
    }
}

int rgpu_resend_from(rgpu_resend_buf *b, uint64_t off, size_t *n, size_t *frames) {
  if (off < b->base || off > b->total) return -1;
  drop_to(b, off);
  *n = rgpu_resend_held(b);
  if (frames) *frames = b->nidx;
  return 0;
}

void rgpu_resend_own(rgpu_resend_buf *b, const void *p, size_t n) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  size_t keep = 0;
  for (size_t i = 0; i < b->nref; i++) {
    rgpu_resend_ref r = b->ref[b->ref_head + i];
    if ((uintptr_t)r.ptr < hi && (uintptr_t)r.ptr + r.len > lo) {
      /* Only the held part: the chunks before base may be gone. */
      uint64_t from = r.off < b->base ? b->base : r.off;
      put(b, from, r.ptr + (from - r.off), (size_t)(r.off + r.len - from));
      continue;
    }
    b->ref[b->ref_head + keep++] = r;
  }
  b->nref = keep;
  if (!keep) b->ref_head = 0;
}

int rgpu_resend_iov(const rgpu_resend_buf *b, size_t skip, struct iovec *iov, int max) {
  size_t held = rgpu_resend_held(b);
  if (skip >= held || max <= 0) return 0;
  uint64_t off = b->base + skip;
  int k = 0;
  size_t r = 0; /* the first reference not wholly before off */
  while (r < b->nref && b->ref[b->ref_head + r].off + b->ref[b->ref_head + r].len <= off) r++;
  while (off < b->total && k < max) {
    const rgpu_resend_ref *ref = r < b->nref ? &b->ref[b->ref_head + r] : NULL;
    if (ref && off >= ref->off) {
      /* Inside a reference: the program's bytes. */
      iov[k].iov_base = (void *)(ref->ptr + (off - ref->off));
      iov[k].iov_len = (size_t)(ref->off + ref->len - off);
      off += iov[k++].iov_len;
      r++;
      continue;
    }
    uint64_t end = ref ? ref->off : b->total;
    size_t covered;
    k += segments(b, off, (size_t)(end - off), iov + k, max - k, &covered);
    off += covered;
  }
  return k;
}

int rgpu_resume_backoff_ms(int attempt) {
  if (attempt < 0) attempt = 0;
  if (attempt > 5) return 2000;
  int ms = 100 << attempt;
  return ms > 2000 ? 2000 : ms;
}
