#include "rgpu_frame.h"

#include <string.h>

#include "rgpu_wire.h"

void rgpu_frame_hdr_encode(uint8_t out[RGPU_FRAME_HDR_SIZE], const rgpu_frame_hdr *h) {
  uint32_t magic = RGPU_FRAME_MAGIC;
  memcpy(out + 0, &magic, 4);
  out[4] = h->version;
  out[5] = h->kind;
  memcpy(out + 6, &h->opcode, 2);
  memcpy(out + 8, &h->length, 4);
  memcpy(out + 12, &h->aux, 4);
  memcpy(out + 16, &h->seq, 8);
}

int rgpu_frame_hdr_decode(const uint8_t in[RGPU_FRAME_HDR_SIZE], size_t max_payload,
                          rgpu_frame_hdr *h) {
  uint32_t magic;
  memcpy(&magic, in, 4);
  if (magic != RGPU_FRAME_MAGIC) return RGPU_PROTO_EBADMAGIC;
  h->version = in[4];
  h->kind = in[5];
  memcpy(&h->opcode, in + 6, 2);
  memcpy(&h->length, in + 8, 4);
  memcpy(&h->aux, in + 12, 4);
  memcpy(&h->seq, in + 16, 8);
  if (h->version != RGPU_PROTO_VERSION) return RGPU_PROTO_EVERSION;
  if (h->kind < RGPU_KIND_REQUEST || h->kind > RGPU_KIND_EVENT) return RGPU_PROTO_EKIND;
  if (h->length > max_payload) return RGPU_PROTO_ETOOBIG;
  return 0;
}
