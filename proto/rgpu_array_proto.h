/* rgpu_array_proto: the values ARRAY_COPY's side kinds take on the wire
 * (proto/rgpu_messages.def, "CUDA arrays").  Header-only: the client's
 * runtime and the server use it. */
#ifndef RGPU_ARRAY_PROTO_H
#define RGPU_ARRAY_PROTO_H

#include <stdint.h>

/* One side of an ARRAY_COPY. */
#define RGPU_COPY_SIDE_HOST 0u   /* the request's tail (source) or the reply's (destination) */
#define RGPU_COPY_SIDE_DEVICE 1u /* device memory: ptr, pitch, rows per slice */
#define RGPU_COPY_SIDE_ARRAY 2u  /* a CUDA array the client named (ARRAY_CREATE) */

/* The largest host side of one ARRAY_COPY: the client splits bigger boxes
 * by slices or rows (a frame carries at most RGPU_FRAME_MAX_PAYLOAD). */
#define RGPU_ARRAY_COPY_MAX_HOST_BYTES (16ull << 20)

#endif
