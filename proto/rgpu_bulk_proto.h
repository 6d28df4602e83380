/* rgpu_bulk_proto: the byte layout of bulk streams ("lanes", quic:// only).
 *
 * A lane is an extra QUIC stream that one client host thread opens for the
 * bulk bytes of its large copies, so that a 256 MiB copy of one thread does
 * not hold up another thread's small calls on stream 0 (the ordered stream
 * that keeps every request, sequence numbers and resume).  See
 * docs/architecture.md, "Bulk streams".
 *
 * Client -> server on a lane:
 *   preamble  u32 magic "RGPB", u32 lane (0..RGPU_BULK_MAX_LANES-1), u64 0
 *   items     u64 bulk_id, u64 len, then len bytes (one H2D chunk each)
 * Server -> client on a lane: ordinary frames (rgpu_frame.h): the reply of a
 * MEMCPY_DTOH_BULK request, header + payload (or the error text).
 *
 * Header-only: both the client core and the server use it. */
#ifndef RGPU_BULK_PROTO_H
#define RGPU_BULK_PROTO_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* HELLO capability: the server accepts lanes and the *_BULK requests.  The
 * server offers it only on quic:// sessions. */
#define RGPU_CAP_BULK_STREAMS 0x4u

#define RGPU_BULK_MAGIC 0x42504752u /* "RGPB" as little-endian bytes */
/* Lanes per session; threads beyond it keep the inline path on stream 0. */
#define RGPU_BULK_MAX_LANES 16
/* Copies from this size on use a lane (smaller ones are cheaper inline). */
#define RGPU_BULK_MIN_BYTES (256u << 10)
#define RGPU_BULK_PREAMBLE_SIZE 16
#define RGPU_BULK_ITEM_HDR_SIZE 16

/* Explicit little-endian, like the wire (rgpu_wire.h). */
static inline void rgpu_bulk_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void rgpu_bulk_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t rgpu_bulk_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t rgpu_bulk_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static inline void rgpu_bulk_preamble_encode(uint8_t out[RGPU_BULK_PREAMBLE_SIZE], uint32_t lane) {
  memset(out, 0, RGPU_BULK_PREAMBLE_SIZE);
  rgpu_bulk_put_u32(out, RGPU_BULK_MAGIC);
  rgpu_bulk_put_u32(out + 4, lane);
}
/* 0 and *lane, or -1 for anything that is not a lane preamble. */
static inline int rgpu_bulk_preamble_decode(const uint8_t in[RGPU_BULK_PREAMBLE_SIZE],
                                            uint32_t *lane) {
  if (rgpu_bulk_get_u32(in) != RGPU_BULK_MAGIC) return -1;
  uint32_t l = rgpu_bulk_get_u32(in + 4);
  if (l >= RGPU_BULK_MAX_LANES || rgpu_bulk_get_u64(in + 8) != 0) return -1;
  *lane = l;
  return 0;
}

static inline void rgpu_bulk_item_encode(uint8_t out[RGPU_BULK_ITEM_HDR_SIZE], uint64_t id,
                                         uint64_t len) {
  rgpu_bulk_put_u64(out, id);
  rgpu_bulk_put_u64(out + 8, len);
}
/* 0, or -1 when id is 0 or len is 0 or above max_len. */
static inline int rgpu_bulk_item_decode(const uint8_t in[RGPU_BULK_ITEM_HDR_SIZE],
                                        uint64_t max_len, uint64_t *id, uint64_t *len) {
  uint64_t i = rgpu_bulk_get_u64(in), l = rgpu_bulk_get_u64(in + 8);
  if (i == 0 || l == 0 || l > max_len) return -1;
  *id = i;
  *len = l;
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
