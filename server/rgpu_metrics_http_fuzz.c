/* libFuzzer target: bytes a scraper (or anyone reaching the --metrics port)
 * sends, through the HTTP request-head parser.  Every input must get one of
 * the documented answers (or "need more"), the same one every time. */
#include <stdint.h>
#include <stdlib.h>

#include "rgpu_metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > RGPU_METRICS_MAX_REQUEST) size = RGPU_METRICS_MAX_REQUEST; /* the reader's cap */
  int head = -1;
  int code = rgpu_metrics_http_parse((const char *)data, size, &head);
  switch (code) {
    case 0: case 200: case 400: case 404: case 405: case 414: case 431: case 505: break;
    default: abort();
  }
  if (code != 200 && head == 1) abort(); /* HEAD is reported only for a served request */
  if (rgpu_metrics_http_parse((const char *)data, size, &head) != code) abort();
  return 0;
}
