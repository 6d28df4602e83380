/* The TENSOR_MAP message's kinds (proto/rgpu_messages.def): which of the
 * driver's tensor-map calls the server makes. */
#ifndef RGPU_TENSOR_MAP_PROTO_H
#define RGPU_TENSOR_MAP_PROTO_H

enum {
  RGPU_TMAP_TILED = 0,       /* cuTensorMapEncodeTiled */
  RGPU_TMAP_IM2COL = 1,      /* cuTensorMapEncodeIm2col */
  RGPU_TMAP_IM2COL_WIDE = 2, /* cuTensorMapEncodeIm2colWide */
  RGPU_TMAP_REPLACE = 3,     /* cuTensorMapReplaceAddress */
};

/* The driver's limit on a tensor map's rank (CUDA 12/13: 1..5; im2col 3..5). */
#define RGPU_TMAP_MAX_RANK 5
#define RGPU_TMAP_BYTES 128

#endif
