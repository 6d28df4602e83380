/* rgpu_status: the one status type of the client API and the layers under it.
 *
 * Before it, seven error spaces (CUresult, RGPU_T_E* of the transport,
 * RGPU_PROTO_E* of the codecs, RGPU_CLIENT_E*, and sentinels such as "went
 * inline" = 1) shared a plain int, and a sentinel could be mistaken for a
 * CUresult (CUDA_ERROR_INVALID_VALUE is 1).  The value ranges below are
 * disjoint by construction, so any rgpu_status says which layer produced it:
 *
 *   0                  success (CUDA_SUCCESS)
 *   > 0                a CUresult, from the server or the client's own checks
 *   -1 .. -999         transport (RGPU_T_E*, transport/rgpu_transport.h:
 *                      negated errno values)
 *   -1000 .. -1999     protocol (RGPU_PROTO_E*, proto/rgpu_wire.h)
 *   -2000 .. -2999     client core (RGPU_CLIENT_E*, defined here)
 *
 * A negative status is a local failure; every one except RGPU_CLIENT_EARG
 * means the connection is gone.  Sentinels ("not taken", "copy the rest
 * inline") are never statuses: functions return them through
 * out-parameters.  The local codes are listed once, in RGPU_STATUS_LOCAL
 * below (rgpu_status_str reads it; client/rgpu_client.c checks at compile
 * time that the transport's and protocol's own definitions agree). */
#ifndef RGPU_STATUS_H
#define RGPU_STATUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t rgpu_status;

#define RGPU_STATUS_OK 0

/* The client core's own codes. */
#define RGPU_CLIENT_EDEAD (-2001) /* the connection failed earlier; logged once */
#define RGPU_CLIENT_EARG (-2002)  /* a caller's mistake (e.g. a reply that needs r->payload) */

/* X(code, name, text): every local (negative) code. */
#define RGPU_STATUS_LOCAL(X)                                                \
  X(-5, "RGPU_T_EIO", "I/O error")                                          \
  X(-13, "RGPU_T_EAUTH", "authentication failed")                           \
  X(-22, "RGPU_T_EINVAL", "invalid argument")                               \
  X(-32, "RGPU_T_ECLOSED", "the server closed the connection")              \
  X(-95, "RGPU_T_ENOTSUP", "transport not supported")                       \
  X(-110, "RGPU_T_ETIMEDOUT", "timed out")                                  \
  X(-111, "RGPU_T_ECONNREFUSED", "connection refused")                      \
  X(-1001, "RGPU_PROTO_ETRUNC", "truncated message")                        \
  X(-1002, "RGPU_PROTO_ETOOBIG", "length or count over its limit")          \
  X(-1003, "RGPU_PROTO_ETRAILING", "trailing bytes after a message")        \
  X(-1004, "RGPU_PROTO_EBADMAGIC", "not an rgpu frame")                     \
  X(-1005, "RGPU_PROTO_EVERSION", "protocol version mismatch")              \
  X(-1006, "RGPU_PROTO_EKIND", "unexpected frame kind")                     \
  X(-1007, "RGPU_PROTO_EOPCODE", "unknown opcode")                          \
  X(-1008, "RGPU_PROTO_ENOMEM", "out of memory")                            \
  X(-1009, "RGPU_PROTO_EINVAL", "inconsistent message content")             \
  X(-2001, "RGPU_CLIENT_EDEAD", "the connection to the server was lost")    \
  X(-2002, "RGPU_CLIENT_EARG", "invalid arguments to a client call")

static inline int rgpu_status_is_cuda(rgpu_status s) { return s > 0; }
static inline int rgpu_status_is_local(rgpu_status s) { return s < 0; }
/* 1 for a transport code, 2 protocol, 3 client, 0 otherwise. */
static inline int rgpu_status_layer(rgpu_status s) {
  return s < 0 && s > -1000 ? 1 : s <= -1000 && s > -2000 ? 2 : s <= -2000 && s > -3000 ? 3 : 0;
}

/* A short text for s: "success", the local code's sentence, or "CUDA error"
 * for a CUresult (the CUDA facade has the CUresult names).  Never NULL. */
const char *rgpu_status_str(rgpu_status s);
/* The local code's name ("RGPU_T_ECLOSED"), or NULL when s is not one. */
const char *rgpu_status_name(rgpu_status s);

#ifdef __cplusplus
}
#endif
#endif
