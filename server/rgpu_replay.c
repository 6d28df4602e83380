/* The replay buffer and request counter of a resumable session: see
 * rgpu_replay.h. */
#include "rgpu_replay.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_frame.h"

void rgpu_replay_init(rgpu_replay *r, int enabled, size_t max_bytes) {
  memset(r, 0, sizeof *r);
  r->enabled = enabled;
  r->max_bytes = max_bytes ? max_bytes : RGPU_REPLAY_DEFAULT_BYTES;
}

static rgpu_replay_seg *seg_at(rgpu_replay *r, size_t i) { return &r->segs[r->seg_head + i]; }

/* Gives a segment's memory back: a caller's buffer to its owner, an owned
 * block to the spares (two are kept, so streaming copies do not fault
 * fresh pages in for every block) or to the allocator. */
static void seg_release(rgpu_replay *r, rgpu_replay_seg *s) {
  if (s->release) {
    s->release(s->ctx, s->buf);
  } else if (s->block == RGPU_REPLAY_BLOCK && r->nspare < 2) {
    r->spare[r->nspare++] = s->buf;
  } else {
    free(s->buf);
    r->cap -= s->block;
  }
  memset(s, 0, sizeof *s);
}

static void drop_segments(rgpu_replay *r) {
  for (size_t i = 0; i < r->nsegs; i++) seg_release(r, seg_at(r, i));
  r->seg_head = r->nsegs = 0;
  r->len = 0;
}

void rgpu_replay_free(rgpu_replay *r) {
  drop_segments(r);
  for (int i = 0; i < r->nspare; i++) free(r->spare[i]);
  r->nspare = 0;
  r->cap = 0;
  free(r->segs);
  free(r->idx);
  free(r->scratch);
  r->segs = NULL;
  r->idx = NULL;
  r->scratch = NULL;
  r->seg_cap = r->scratch_cap = 0;
  r->nidx = r->idx_cap = r->idx_head = 0;
}

/* Forgets index entries of frames that start below base. */
static void trim_index(rgpu_replay *r) {
  while (r->nidx && r->idx[r->idx_head].off < r->base) {
    r->idx_head++;
    r->nidx--;
  }
  if (r->nidx == 0) r->idx_head = 0;
}

static void drop_front(rgpu_replay *r, size_t n) {
  if (n > r->len) n = r->len;
  r->len -= n;
  r->base += n;
  while (n && r->nsegs) {
    rgpu_replay_seg *s = seg_at(r, 0);
    size_t k = n < s->len ? n : s->len;
    s->p += k;
    s->len -= k;
    n -= k;
    /* An emptied block still taking appends stays. */
    if (s->len == 0 && !(r->nsegs == 1 && !s->release && s->room)) {
      seg_release(r, s);
      r->seg_head++;
      r->nsegs--;
    }
  }
  if (r->nsegs == 0) r->seg_head = 0;
  trim_index(r);
}

/* Everything kept is gone and the next nb bytes will not be kept either. */
static void lose_all(rgpu_replay *r, size_t nb) {
  r->dropped_unacked += r->len + nb;
  drop_segments(r);
  r->base = r->total + nb;
  r->nidx = r->idx_head = 0;
}

static int index_push(rgpu_replay *r, uint64_t seq, uint64_t off, uint64_t len) {
  /* An array FIFO with a moving head (rgpu_array.h). */
  if (RGPU_ARRAY_QUEUE_ROOM(r->idx, r->idx_head, r->nidx, r->idx_cap, 64)) return -1;
  r->idx[r->idx_head + r->nidx++] = (rgpu_replay_reply){seq, off, len};
  return 0;
}

/* A new segment at the end (NULL when out of memory). */
static rgpu_replay_seg *seg_push(rgpu_replay *r) {
  if (RGPU_ARRAY_QUEUE_ROOM(r->segs, r->seg_head, r->nsegs, r->seg_cap, 16)) return NULL;
  rgpu_replay_seg *s = seg_at(r, r->nsegs++);
  memset(s, 0, sizeof *s);
  return s;
}

/* Copies n bytes to the end of the kept stream. */
static int copy_in(rgpu_replay *r, const uint8_t *src, size_t n) {
  while (n) {
    rgpu_replay_seg *s = r->nsegs ? seg_at(r, r->nsegs - 1) : NULL;
    if (!s || s->release || !s->room) {
      size_t size = n > RGPU_REPLAY_BLOCK ? n : RGPU_REPLAY_BLOCK;
      void *b = NULL;
      if (size == RGPU_REPLAY_BLOCK && r->nspare) {
        b = r->spare[--r->nspare];
      } else {
        b = malloc(size);
        if (!b) return -1;
        r->cap += size;
      }
      s = seg_push(r);
      if (!s) {
        if (size == RGPU_REPLAY_BLOCK && r->nspare < 2) {
          r->spare[r->nspare++] = b;
        } else {
          free(b);
          r->cap -= size;
        }
        return -1;
      }
      *s = (rgpu_replay_seg){.p = b, .room = size, .buf = b, .block = size};
    }
    size_t k = n < s->room ? n : s->room;
    memcpy(s->p + s->len, src, k);
    s->len += k;
    s->room -= k;
    src += k;
    n -= k;
  }
  return 0;
}

/* Gathers len bytes at pos of the group iov[0..n) into out. */
static int iov_read(const struct iovec *iov, int n, size_t pos, uint8_t *out, size_t len) {
  for (int i = 0; i < n && len; i++) {
    if (pos >= iov[i].iov_len) {
      pos -= iov[i].iov_len;
      continue;
    }
    size_t k = iov[i].iov_len - pos < len ? iov[i].iov_len - pos : len;
    memcpy(out, (const uint8_t *)iov[i].iov_base + pos, k);
    out += k;
    len -= k;
    pos = 0;
  }
  return len ? -1 : 0;
}

int rgpu_replay_append(rgpu_replay *r, const struct iovec *iov, int n) {
  return rgpu_replay_append_ref(r, iov, n, -1, NULL, NULL, NULL);
}

int rgpu_replay_append_ref(rgpu_replay *r, const struct iovec *iov, int n, int ref,
                           rgpu_replay_release_fn release, void *ctx, void *buf) {
  int has_ref = ref >= 0 && ref < n && release;
  size_t nb = 0;
  for (int i = 0; i < n; i++) nb += iov[i].iov_len;
  if (!r->enabled || nb == 0 || nb > r->max_bytes) {
    if (r->enabled && nb > r->max_bytes) lose_all(r, nb);
    r->total += nb;
    if (!r->enabled) r->base = r->total;
    if (has_ref) release(ctx, buf);
    return 0;
  }
  if (r->len + nb > r->max_bytes) {
    size_t drop = r->len + nb - r->max_bytes;
    r->dropped_unacked += drop;
    drop_front(r, drop);
  }
  /* Index the reply frames of this group (it holds complete frames). */
  int ok = 0;
  for (size_t pos = 0; pos + RGPU_FRAME_HDR_SIZE <= nb;) {
    uint8_t hb[RGPU_FRAME_HDR_SIZE];
    rgpu_frame_hdr h;
    if (iov_read(iov, n, pos, hb, sizeof hb) || rgpu_frame_hdr_decode(hb, (size_t)-1, &h) != 0) break;
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    if (h.kind == RGPU_KIND_REPLY && h.seq && index_push(r, h.seq, r->total + pos, flen)) ok = -1;
    pos += flen;
  }
  int fail = 0;
  for (int i = 0; i < n && !fail; i++) {
    if (i == ref && has_ref) {
      rgpu_replay_seg *s = seg_push(r);
      if (s) {
        *s = (rgpu_replay_seg){.p = iov[i].iov_base, .len = iov[i].iov_len, .buf = buf,
                               .release = release, .ctx = ctx};
        r->kept_by_ref += iov[i].iov_len;
        has_ref = 0; /* owned by the segment now */
        continue;
      }
    }
    if (iov[i].iov_len && copy_in(r, iov[i].iov_base, iov[i].iov_len)) fail = 1;
  }
  if (has_ref) release(ctx, buf);
  if (fail) {
    /* Part of the group is missing: keep nothing rather than a hole. */
    lose_all(r, nb);
    r->total += nb;
    return -1;
  }
  r->len += nb;
  r->total += nb;
  return ok;
}

void rgpu_replay_copy_refs(rgpu_replay *r) {
  for (size_t i = 0; i < r->nsegs; i++) {
    rgpu_replay_seg *s = seg_at(r, i);
    if (!s->release) continue;
    void *b = s->len ? malloc(s->len) : NULL;
    if (s->len && !b) {
      lose_all(r, 0);
      return;
    }
    if (s->len) memcpy(b, s->p, s->len);
    size_t len = s->len;
    s->release(s->ctx, s->buf);
    *s = (rgpu_replay_seg){.p = b, .len = len, .buf = b, .block = len};
    r->cap += len;
  }
}

/* An empty buffer larger than this is given back: one large copy must not
 * hold its size for the rest of the session. */
#define RGPU_REPLAY_KEEP_BYTES (32u << 20)

void rgpu_replay_ack(rgpu_replay *r, uint64_t rx_bytes) {
  if (rx_bytes > r->total || rx_bytes <= r->base) return;
  drop_front(r, (size_t)(rx_bytes - r->base));
  if (r->len == 0 && r->nsegs == 1 && seg_at(r, 0)->block > RGPU_REPLAY_KEEP_BYTES) {
    seg_release(r, seg_at(r, 0));
    r->nsegs = r->seg_head = 0;
  }
  if (r->scratch_cap > RGPU_REPLAY_KEEP_BYTES) {
    free(r->scratch);
    r->scratch = NULL;
    r->scratch_cap = 0;
  }
}

/* Points *p at n kept bytes starting at stream offset off: into their
 * segment when one holds them all, else flattened into the scratch buffer
 * (resumes and duplicate requests only, so the copy is rare). */
static int view(rgpu_replay *r, uint64_t off, size_t n, const uint8_t **p) {
  *p = NULL;
  if (n == 0) return 0;
  size_t rel = (size_t)(off - r->base), i = 0;
  while (i < r->nsegs && rel >= seg_at(r, i)->len) rel -= seg_at(r, i++)->len;
  if (i == r->nsegs) return -1;
  rgpu_replay_seg *s = seg_at(r, i);
  if (s->len - rel >= n) {
    *p = s->p + rel;
    return 0;
  }
  if (r->scratch_cap < n) {
    uint8_t *ns = realloc(r->scratch, n);
    if (!ns) return -1;
    r->scratch = ns;
    r->scratch_cap = n;
  }
  size_t got = 0;
  for (; i < r->nsegs && got < n; i++, rel = 0) {
    s = seg_at(r, i);
    size_t k = s->len - rel < n - got ? s->len - rel : n - got;
    memcpy(r->scratch + got, s->p + rel, k);
    got += k;
  }
  if (got < n) return -1;
  *p = r->scratch;
  return 0;
}

int rgpu_replay_from(rgpu_replay *r, uint64_t rx_bytes, const uint8_t **p, size_t *n) {
  if (rx_bytes > r->total || rx_bytes < r->base) return -1;
  *n = (size_t)(r->total - rx_bytes);
  return view(r, rx_bytes, *n, p);
}

void rgpu_replay_consumed(rgpu_replay *r, uint64_t n) { r->rx_consumed += n; }

int rgpu_replay_find_reply(rgpu_replay *r, uint64_t seq, const uint8_t **p, size_t *n) {
  for (size_t i = r->nidx; i-- > 0;) {
    const rgpu_replay_reply *e = &r->idx[r->idx_head + i];
    if (e->seq != seq) continue;
    if (e->off < r->base || e->off + e->len > r->total) return -1;
    *n = (size_t)e->len;
    return view(r, e->off, *n, p);
  }
  return -1;
}
