/* rgpu_fatbin_filter: see rgpu_fatbin_filter.h. */
#include "rgpu_fatbin_filter.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* 1 when a device of capability cc can use entry e of its kind. */
static int runs_on(const rgpu_fatbin_entry *e, unsigned cc) {
  if (e->flags & RGPU_FATBIN_FLAG_ARCH_SPECIFIC) return e->arch == cc;
  if (e->kind == RGPU_FATBIN_KIND_ELF) return e->arch / 10 == cc / 10 && e->arch <= cc;
  return e->arch <= cc; /* PTX: JIT-compiled for any newer device */
}

static const rgpu_fatbin_entry *newest(const rgpu_fatbin *fb, unsigned kind, unsigned cc) {
  const rgpu_fatbin_entry *best = NULL;
  for (size_t i = 0; i < fb->nentries; i++) {
    const rgpu_fatbin_entry *e = &fb->entries[i];
    if (e->kind != kind || !runs_on(e, cc)) continue;
    /* The newest wins; among equals the first, in nvcc's order. */
    if (!best || e->arch > best->arch) best = e;
  }
  return best;
}

const rgpu_fatbin_entry *rgpu_fatbin_pick(const rgpu_fatbin *fb, unsigned cc, int sass_ok) {
  if (!fb || !cc) return NULL;
  const rgpu_fatbin_entry *e = sass_ok ? newest(fb, RGPU_FATBIN_KIND_ELF, cc) : NULL;
  return e ? e : newest(fb, RGPU_FATBIN_KIND_PTX, cc);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int rgpu_fatbin_filter(const void *image, size_t len, unsigned cc, int sass_ok, void **out,
                       size_t *out_len) {
  if (!image || !out || !out_len) return RGPU_FATBIN_ERR_ARG;
  *out = NULL;
  *out_len = 0;
  rgpu_fatbin fb;
  int rc = rgpu_fatbin_open(image, len, &fb);
  if (rc) return rc;
  const rgpu_fatbin_entry *e = rgpu_fatbin_pick(&fb, cc, sass_ok);
  if (!e) {
    rgpu_fatbin_close(&fb);
    return RGPU_FATBIN_ERR_NOT_FOUND;
  }
  /* The entry's header and payload, as one span of the original image
   * (rgpu_fatbin_open checked that it lies inside it). */
  const uint8_t *start = fb.image + e->offset;
  size_t span = (size_t)(e->payload - start) + e->payload_size;
  uint8_t *buf = malloc(RGPU_FATBIN_HEADER_SIZE + span);
  if (!buf) {
    rgpu_fatbin_close(&fb);
    return RGPU_FATBIN_ERR_NOMEM;
  }
  put_le(buf, RGPU_FATBIN_MAGIC, 4);
  put_le(buf + 4, 1, 2); /* version */
  put_le(buf + 6, RGPU_FATBIN_HEADER_SIZE, 2);
  put_le(buf + 8, span, 8);
  memcpy(buf + RGPU_FATBIN_HEADER_SIZE, start, span);
  rgpu_fatbin_close(&fb);
  *out = buf;
  *out_len = RGPU_FATBIN_HEADER_SIZE + span;
  return RGPU_FATBIN_OK;
}
