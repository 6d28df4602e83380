#include "rgpu_frame_io.h"

#include <stdint.h>

int rgpu_frame_write(rgpu_conn *c, rgpu_frame_hdr *h, const void *fixed, size_t fixed_len,
                     const void *tail, size_t tail_len) {
  if (fixed_len + tail_len > UINT32_MAX) return RGPU_PROTO_ETOOBIG;
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  h->length = (uint32_t)(fixed_len + tail_len);
  rgpu_frame_hdr_encode(hdr, h);
  struct iovec iov[3];
  int n = 0;
  iov[n].iov_base = hdr;
  iov[n++].iov_len = sizeof hdr;
  if (fixed_len) {
    iov[n].iov_base = (void *)fixed;
    iov[n++].iov_len = fixed_len;
  }
  if (tail_len) {
    iov[n].iov_base = (void *)tail;
    iov[n++].iov_len = tail_len;
  }
  return rgpu_conn_writev_all(c, iov, n);
}

int rgpu_frame_read_hdr(rgpu_conn *c, rgpu_frame_hdr *h, size_t max_payload) {
  uint8_t hdr[RGPU_FRAME_HDR_SIZE];
  int rc = rgpu_conn_read_exact(c, hdr, sizeof hdr);
  if (rc) return rc;
  return rgpu_frame_hdr_decode(hdr, max_payload, h);
}

int rgpu_frame_read(rgpu_conn *c, rgpu_frame_hdr *h, rgpu_buf *payload, size_t max_payload) {
  int rc = rgpu_frame_read_hdr(c, h, max_payload);
  if (rc) return rc;
  rgpu_buf_reset(payload);
  if (h->length == 0) return 0;
  if (rgpu_buf_reserve(payload, h->length)) return RGPU_PROTO_ENOMEM;
  rc = rgpu_conn_read_exact(c, payload->data, h->length);
  if (rc) return rc;
  payload->len = h->length;
  return 0;
}
