/* libFuzzer target: rgpu_uri_parse must never crash, overrun or accept a
 * result it cannot represent, whatever RGPU_SERVER contains. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  rgpu_uri u;
  char err[64]; /* small on purpose: messages must truncate, not overflow */
  if (rgpu_uri_parse(text, &u, err, sizeof err) == 0) {
    if (u.scheme == RGPU_URI_UNIX) {
      if (u.path[0] != '/' || strlen(u.path) >= sizeof u.path) abort();
    } else if (!u.host[0] || strlen(u.host) >= sizeof u.host) {
      abort();
    }
  } else if (!memchr(err, 0, sizeof err)) {
    abort();
  }
  free(text);
  return 0;
}
