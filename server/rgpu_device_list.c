/* rgpu-server --devices LIST: see rgpu_device_list.h. */
#include "rgpu_device_list.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int rgpu_device_list_parse(const char *list, int *out, int max, int *n, char *err,
                           size_t errlen) {
  *n = 0;
  if (!list || !*list) {
    snprintf(err, errlen, "--devices: empty list (expected ordinals like 0,1)");
    return -1;
  }
  const char *p = list;
  for (;;) {
    if (!isdigit((unsigned char)*p)) {
      snprintf(err, errlen, "--devices %s: expected a comma-separated list of device ordinals",
               list);
      return -1;
    }
    long v = 0;
    while (isdigit((unsigned char)*p)) {
      v = v * 10 + (*p++ - '0');
      if (v > 1000000) {
        snprintf(err, errlen, "--devices %s: ordinal too large", list);
        return -1;
      }
    }
    if (*p != ',' && *p != 0) {
      snprintf(err, errlen, "--devices %s: expected a comma-separated list of device ordinals",
               list);
      return -1;
    }
    for (int i = 0; i < *n; i++)
      if (out[i] == (int)v) {
        snprintf(err, errlen, "--devices %s: device %ld is named twice", list, v);
        return -1;
      }
    if (*n == max) {
      snprintf(err, errlen, "--devices %s: more than %d devices", list, max);
      return -1;
    }
    out[(*n)++] = (int)v;
    if (*p == 0) return 0;
    p++; /* the comma: an entry must follow */
  }
}

int rgpu_device_list_check(const int *list, int n, int count, char *err, size_t errlen) {
  for (int i = 0; i < n; i++)
    if (list[i] >= count) {
      snprintf(err, errlen, "--devices: device %d does not exist (the driver has %d device%s)",
               list[i], count, count == 1 ? "" : "s");
      return -1;
    }
  return 0;
}
