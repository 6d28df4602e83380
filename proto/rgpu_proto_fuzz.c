/* libFuzzer target: frame headers and every message decoder.
 * The first two input bytes pick the opcode, the third the part. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rgpu_frame.h"
#include "rgpu_messages.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= RGPU_FRAME_HDR_SIZE) {
    rgpu_frame_hdr h;
    (void)rgpu_frame_hdr_decode(data, RGPU_FRAME_MAX_PAYLOAD, &h);
  }
  if (size < 3) return 0;
  uint16_t op;
  memcpy(&op, data, 2);
  int part = data[2] % 3;
  (void)rgpu_msg_validate(op, part, data + 3, size - 3);
  return 0;
}
