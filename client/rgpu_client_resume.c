/* The client's resend buffer: see rgpu_client_resume.h. */
#include "rgpu_client_resume.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_frame.h"

void rgpu_resend_init(rgpu_resend_buf *b) { memset(b, 0, sizeof *b); }

void rgpu_resend_free(rgpu_resend_buf *b) {
  free(b->data);
  free(b->idx);
  memset(b, 0, sizeof *b);
}

/* An empty buffer larger than this is given back after a large copy; up to
 * it is kept, so streaming copies do not fault fresh pages in every time
 * (the buffer cycles within 2 x RGPU_RESEND_MAX_BYTES). */
#define RGPU_RESEND_KEEP_BYTES (64u << 20)

static void drop_to(rgpu_resend_buf *b, uint64_t off) {
  if (off <= b->base) return;
  if (off > b->total) off = b->total;
  size_t n = (size_t)(off - b->base);
  b->head += n;
  b->len -= n;
  b->base = off;
  if (b->len == 0) b->head = 0;
  if (b->len == 0 && b->cap > RGPU_RESEND_KEEP_BYTES) {
    free(b->data);
    b->data = NULL;
    b->cap = 0;
  }
  while (b->nidx && b->idx[b->idx_head].end <= b->base) {
    b->idx_head++;
    b->nidx--;
  }
  if (b->nidx == 0) b->idx_head = 0;
}

/* The frame index is an array FIFO: confirmations take from the front
 * (idx_head), appends push at the back. */
static int index_push(rgpu_resend_buf *b, uint64_t seq, uint64_t end) {
  if (RGPU_ARRAY_QUEUE_ROOM(b->idx, b->idx_head, b->nidx, b->idx_cap, 256)) return -1;
  b->idx[b->idx_head + b->nidx++] = (rgpu_resend_frame){seq, end};
  return 0;
}

int rgpu_resend_append(rgpu_resend_buf *b, const struct iovec *iov, int n) {
  return rgpu_resend_append_aside(b, iov, n, -1, NULL);
}

int rgpu_resend_append_aside(rgpu_resend_buf *b, const struct iovec *iov, int n, int aside,
                             uint8_t **aside_dst) {
  if (aside_dst) *aside_dst = NULL;
  size_t nb = 0;
  for (int i = 0; i < n; i++) nb += iov[i].iov_len;
  if (nb == 0) return 0;
  if (b->head + b->len + nb > b->cap) {
    /* Room for twice what is held: compacting (a copy of what is held)
     * then happens at most once per that many appended bytes. */
    size_t need = b->len + nb, nc = b->cap ? b->cap : (256u << 10);
    while (nc < 2 * need) nc *= 2;
    if (nc > b->cap) {
      uint8_t *nd = malloc(nc);
      if (!nd) {
        b->oom = 1;
        b->total += nb;
        b->base = b->total; /* nothing before this can be re-sent */
        b->head = b->len = 0;
        b->nidx = b->idx_head = 0;
        return -1;
      }
      if (b->len) memcpy(nd, b->data + b->head, b->len);
      free(b->data);
      b->data = nd;
      b->cap = nc;
    } else if (b->len) {
      memmove(b->data, b->data + b->head, b->len);
    }
    b->head = 0;
  }
  uint8_t *dst = b->data + b->head + b->len;
  for (int i = 0; i < n; i++) {
    if (i == aside && aside_dst)
      *aside_dst = dst; /* the caller fills it (no frame header lies inside a tail) */
    else if (iov[i].iov_len)
      memcpy(dst, iov[i].iov_base, iov[i].iov_len);
    dst += iov[i].iov_len;
  }
  size_t pos = b->head + b->len, end = pos + nb;
  uint64_t off = b->total;
  int rc = 0;
  while (pos + RGPU_FRAME_HDR_SIZE <= end) {
    rgpu_frame_hdr h;
    if (rgpu_frame_hdr_decode(b->data + pos, (size_t)-1, &h) != 0) break;
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    off += flen;
    pos += flen;
    if (h.seq && index_push(b, h.seq, off)) {
      b->oom = 1;
      rc = -1;
    }
  }
  b->len += nb;
  b->total += nb;
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

int rgpu_resend_from(rgpu_resend_buf *b, uint64_t off, const uint8_t **p, size_t *n,
                     size_t *frames) {
  if (off < b->base || off > b->total) return -1;
  drop_to(b, off);
  *p = b->data ? b->data + b->head : NULL;
  *n = b->len;
  if (frames) *frames = b->nidx;
  return 0;
}

int rgpu_resume_backoff_ms(int attempt) {
  if (attempt < 0) attempt = 0;
  if (attempt > 5) return 2000;
  int ms = 100 << attempt;
  return ms > 2000 ? 2000 : ms;
}
