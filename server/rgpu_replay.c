/* The replay buffer and request counter of a resumable session: see
 * rgpu_replay.h. */
#include "rgpu_replay.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_frame.h"

void rgpu_replay_init(rgpu_replay *r, int enabled, size_t max_bytes) {
  memset(r, 0, sizeof *r);
  r->enabled = enabled;
  r->max_bytes = max_bytes ? max_bytes : RGPU_REPLAY_DEFAULT_BYTES;
}

void rgpu_replay_free(rgpu_replay *r) {
  free(r->data);
  free(r->idx);
  r->data = NULL;
  r->idx = NULL;
  r->len = r->cap = r->head = 0;
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
  r->head += n;
  r->len -= n;
  r->base += n;
  if (r->len == 0) r->head = 0;
  trim_index(r);
}

/* Everything kept is gone and the next nb bytes will not be kept either. */
static void lose_all(rgpu_replay *r, size_t nb) {
  r->dropped_unacked += r->len + nb;
  r->head = r->len = 0;
  r->base = r->total + nb;
  r->nidx = r->idx_head = 0;
}

static int index_push(rgpu_replay *r, uint64_t seq, uint64_t off, uint64_t len) {
  if (r->idx_head + r->nidx == r->idx_cap) {
    if (r->idx_head > 0) {
      memmove(r->idx, r->idx + r->idx_head, r->nidx * sizeof *r->idx);
      r->idx_head = 0;
    } else {
      size_t nc = r->idx_cap ? r->idx_cap * 2 : 64;
      rgpu_replay_reply *ni = realloc(r->idx, nc * sizeof *ni);
      if (!ni) return -1;
      r->idx = ni;
      r->idx_cap = nc;
    }
  }
  r->idx[r->idx_head + r->nidx++] = (rgpu_replay_reply){seq, off, len};
  return 0;
}

int rgpu_replay_append(rgpu_replay *r, const struct iovec *iov, int n) {
  size_t nb = 0;
  for (int i = 0; i < n; i++) nb += iov[i].iov_len;
  if (!r->enabled) {
    r->total += nb;
    r->base = r->total;
    return 0;
  }
  if (nb == 0) return 0;
  if (nb > r->max_bytes) {
    lose_all(r, nb);
    r->total += nb;
    return 0;
  }
  if (r->len + nb > r->max_bytes) {
    size_t drop = r->len + nb - r->max_bytes;
    r->dropped_unacked += drop;
    drop_front(r, drop);
  }
  if (r->head + r->len + nb > r->cap) {
    /* Room for twice what is kept, so that compacting (a copy of what is
     * kept) happens at most once per that many appended bytes. */
    size_t need = r->len + nb, nc = r->cap ? r->cap : (1u << 20);
    /* Up to twice the bound: a buffer kept full (a client that stopped
     * acknowledging) otherwise compacts all it holds for every append. */
    while (nc < 2 * need && nc < 2 * r->max_bytes) nc *= 2;
    if (nc > 2 * r->max_bytes) nc = 2 * r->max_bytes;
    if (nc < need) nc = need;
    if (nc > r->cap) {
      uint8_t *nd = malloc(nc);
      if (!nd) {
        lose_all(r, nb);
        r->total += nb;
        return -1;
      }
      if (r->len) memcpy(nd, r->data + r->head, r->len);
      free(r->data);
      r->data = nd;
      r->cap = nc;
    } else if (r->len) {
      memmove(r->data, r->data + r->head, r->len);
    }
    r->head = 0;
  }
  uint8_t *dst = r->data + r->head + r->len;
  for (int i = 0; i < n; i++) {
    if (iov[i].iov_len) memcpy(dst, iov[i].iov_base, iov[i].iov_len);
    dst += iov[i].iov_len;
  }
  /* Index the reply frames of this group (it holds complete frames). */
  size_t pos = r->head + r->len, end = pos + nb;
  uint64_t off = r->total;
  int ok = 0;
  while (pos + RGPU_FRAME_HDR_SIZE <= end) {
    rgpu_frame_hdr h;
    if (rgpu_frame_hdr_decode(r->data + pos, (size_t)-1, &h) != 0) break;
    size_t flen = RGPU_FRAME_HDR_SIZE + (size_t)h.length;
    if (h.kind == RGPU_KIND_REPLY && h.seq && index_push(r, h.seq, off, flen)) ok = -1;
    pos += flen;
    off += flen;
  }
  r->len += nb;
  r->total += nb;
  return ok;
}

/* An empty buffer larger than this is given back: one large copy must not
 * pin its size for the rest of the session. */
#define RGPU_REPLAY_KEEP_BYTES (32u << 20)

void rgpu_replay_ack(rgpu_replay *r, uint64_t rx_bytes) {
  if (rx_bytes > r->total || rx_bytes <= r->base) return;
  drop_front(r, (size_t)(rx_bytes - r->base));
  if (r->len == 0 && r->cap > RGPU_REPLAY_KEEP_BYTES) {
    free(r->data);
    r->data = NULL;
    r->cap = r->head = 0;
  }
}

int rgpu_replay_from(const rgpu_replay *r, uint64_t rx_bytes, const uint8_t **p, size_t *n) {
  if (rx_bytes > r->total || rx_bytes < r->base) return -1;
  *p = r->data ? r->data + r->head + (size_t)(rx_bytes - r->base) : NULL;
  *n = (size_t)(r->total - rx_bytes);
  return 0;
}

void rgpu_replay_consumed(rgpu_replay *r, uint64_t n) { r->rx_consumed += n; }

int rgpu_replay_find_reply(const rgpu_replay *r, uint64_t seq, const uint8_t **p, size_t *n) {
  for (size_t i = r->nidx; i-- > 0;) {
    const rgpu_replay_reply *e = &r->idx[r->idx_head + i];
    if (e->seq != seq) continue;
    if (e->off < r->base || e->off + e->len > r->total) return -1;
    *p = r->data + r->head + (size_t)(e->off - r->base);
    *n = (size_t)e->len;
    return 0;
  }
  return -1;
}
