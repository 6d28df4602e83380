/* rgpu_frame_io: reading and writing whole frames on a transport conn. */
#ifndef RGPU_FRAME_IO_H
#define RGPU_FRAME_IO_H

#include <stddef.h>

#include "rgpu_frame.h"
#include "rgpu_transport.h"
#include "rgpu_wire.h"

/* Sends header + fixed fields + optional tail in one gathered write (the
 * tail is never copied).  h->length is computed here.  Returns 0 or a
 * negative transport error. */
int rgpu_frame_write(rgpu_conn *c, rgpu_frame_hdr *h, const void *fixed, size_t fixed_len,
                     const void *tail, size_t tail_len);

/* Reads one frame: header into *h, payload into payload (resized; caller
 * owns it).  Returns 0, a negative transport error, or an RGPU_PROTO_E*
 * code for a malformed header (after which the stream cannot be trusted
 * and must be closed). */
int rgpu_frame_read(rgpu_conn *c, rgpu_frame_hdr *h, rgpu_buf *payload, size_t max_payload);

/* Reads only the header; the caller then reads h->length payload bytes
 * itself (used to receive bulk data straight into its destination). */
int rgpu_frame_read_hdr(rgpu_conn *c, rgpu_frame_hdr *h, size_t max_payload);

#endif
