/* What the cuDNN facade's calls that reach the server share: the session
 * and stream entry, and the forward convolution's checks and wire shape
 * (used by the convolution and by its algorithm queries). */
#ifndef RGPU_CUDNN_CALL_H
#define RGPU_CUDNN_CALL_H

#include "rgpu_client.h"
#include "rgpu_cudnn_internal.h"
#include "rgpu_messages.h"

/* The session and the handle's stream (its wire id and device); a
 * capturing stream is refused (NOT_SUPPORTED, logged once): for calls that
 * are no graph node (they send directly). */
cudnnStatus_t rgpu_cudnn_enter(struct cudnnContext *h, const char *api, rgpu_client **c,
                               uint64_t *wire, int *device);
/* A round trip's failure rc (nonzero) as the call's status: a broken
 * connection is the runtime's sticky error (EXECUTION_FAILED); a server
 * refusal is NOT_SUPPORTED, BAD_PARAM or EXECUTION_FAILED, logged with the
 * server's message msg. */
cudnnStatus_t rgpu_cudnn_reply_status(rgpu_client *c, rgpu_status rc, const char *api,
                                      const char *msg);
/* The same for calls sent through rgpu_cudnn_submit, which capture. */
cudnnStatus_t rgpu_cudnn_enter_stream(struct cudnnContext *h, rgpu_client **c, uint64_t *wire,
                                      int *device);
/* Queues an encoded request of message opcode (its encoder's return code
 * encode_rc, its bytes req, freed here) on stream wire like a kernel
 * launch: no reply, errors deferred; on a capturing stream a graph node
 * that sends it at every launch.  The message must begin u64 handle, u64
 * stream (every cuDNN compute request does). */
cudnnStatus_t rgpu_cudnn_submit(rgpu_client *c, int device, uint64_t wire, uint16_t opcode,
                                int encode_rc, rgpu_buf *req);
/* rgpu_cudnn_submit of request q (a pointer) of message OP (CUDNN_CONV_FWD)
 * whose codec is named name (cudnn_conv_fwd). */
#define RGPU_CUDNN_SUBMIT(c, device, wire, OP, name, q)                                      \
  __extension__({                                                                           \
    rgpu_buf b_;                                                                            \
    rgpu_buf_init(&b_);                                                                     \
    rgpu_cudnn_submit((c), (device), (wire), RGPU_OP_##OP, rgpu_msg_##name##_req_encode(&b_, (q)), \
                      &b_);                                                                 \
  })
/* cuDNN's checks of a forward convolution's descriptors: all set, y's
 * dimensions the output's, x and w of one type (BAD_PARAM otherwise). */
cudnnStatus_t rgpu_cudnn_conv_check(const struct cudnnTensorStruct *x,
                                    const struct cudnnFilterStruct *w,
                                    const struct cudnnConvolutionStruct *cv,
                                    const struct cudnnTensorStruct *y);
/* The descriptor fields of CUDNN_CONV_FWD (pointers left 0). */
void rgpu_cudnn_conv_shape_fields(rgpu_msg_cudnn_conv_fwd_req *q,
                                  const struct cudnnTensorStruct *x,
                                  const struct cudnnFilterStruct *w,
                                  const struct cudnnConvolutionStruct *cv,
                                  const struct cudnnTensorStruct *y);

#endif
