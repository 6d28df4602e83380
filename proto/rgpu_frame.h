/* rgpu_frame: the 24-byte header in front of every message.
 *
 *   u32 magic   "RGP1"
 *   u8  version protocol version (1)
 *   u8  kind    request, reply or server event
 *   u16 opcode  what the payload is (rgpu_messages.h)
 *   u32 length  payload bytes following the header
 *   u32 aux     request: flags; reply: status (CUresult); event: event data
 *   u64 seq     request id: a 64-bit sequence per session; a reply carries
 *               the id of its request, an async-error event the id of the
 *               request that failed
 *
 * Batching is simply several frames in one write: the header needs no batch
 * concept, and the server executes frames in arrival order. */
#ifndef RGPU_FRAME_H
#define RGPU_FRAME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_FRAME_MAGIC 0x31504752u /* "RGP1" as little-endian bytes */
#define RGPU_PROTO_VERSION 1
#define RGPU_FRAME_HDR_SIZE 24
/* Bulk copies are cut into chunks of at most this many payload bytes so that
 * neither side ever buffers a whole 1 GiB copy and other requests can pass. */
#define RGPU_CHUNK_BYTES (4u << 20)
/* Hard limit on one frame's payload; larger frames close the connection. */
#define RGPU_FRAME_MAX_PAYLOAD ((64u << 20) + 65536u)

typedef enum {
  RGPU_KIND_REQUEST = 1,
  RGPU_KIND_REPLY = 2,
  RGPU_KIND_EVENT = 3
} rgpu_frame_kind;

/* HELLO capability bits (both directions; the session uses the AND). */
#define RGPU_CAP_ASYNC_ERRORS 0x1u /* server sends ASYNC_ERROR for failed unreplied requests */
#define RGPU_CAP_OUTPUT 0x2u       /* server forwards device printf as OUTPUT events */
/* Client to server only: this client never resumes (RGPU_RECONNECT_S=0), so
 * it sends no ACKs and the server keeps no replay buffer for it. */
#define RGPU_CAP_NO_RESUME 0x100u
/* The server keeps kernel images in its image cache (issue 15): MODULE_LOAD
 * may name an image by its hash alone. */
#define RGPU_CAP_IMAGE_CACHE 0x8u
/* Client to server: over quic:// this client moves its session to a port of
 * the worker's own when HELLO's or RESUME's reply names one (issue 21,
 * server/rgpu_quic_direct.h).  Not echoed: the port is the answer. */
#define RGPU_CAP_QUIC_DIRECT 0x10u

/* Reply statuses (frame aux) that are not CUresults: above every CUresult
 * (CUDA_ERROR_UNKNOWN is 999), never returned to a program.
 * RGPU_STATUS_IMAGE_NOT_CACHED: a MODULE_LOAD named an image by its hash
 * and the server does not have it (or its copy failed verification):
 * send the request again with the image. */
#define RGPU_STATUS_IMAGE_NOT_CACHED 0x10001u

/* Request flags (aux of a request). */
#define RGPU_REQ_NEED_REPLY 0x1u /* the client waits for a reply */
/* The program's call has returned as if this request were complete (a
 * synchronous cudaMemcpy from the host, which rgpu does not wait for): the
 * server makes the device's other streams wait for it, since a program may
 * go on to use the data on a non-blocking stream, which CUDA's legacy
 * stream does not order. */
#define RGPU_REQ_HOST_ORDERED 0x2u

typedef struct {
  uint8_t version;
  uint8_t kind;
  uint16_t opcode;
  uint32_t length;
  uint32_t aux;
  uint64_t seq;
} rgpu_frame_hdr;

void rgpu_frame_hdr_encode(uint8_t out[RGPU_FRAME_HDR_SIZE], const rgpu_frame_hdr *h);
/* Validates magic, version, kind and length (<= max_payload). Returns 0 or
 * an RGPU_PROTO_E* code. */
int rgpu_frame_hdr_decode(const uint8_t in[RGPU_FRAME_HDR_SIZE], size_t max_payload,
                          rgpu_frame_hdr *h);

#ifdef __cplusplus
}
#endif
#endif
