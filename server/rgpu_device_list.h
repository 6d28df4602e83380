/* rgpu-server --devices LIST: which of the server's devices a session sees.
 *
 * LIST is comma-separated device ordinals of the driver ("0,2"); session
 * device i is the driver's device LIST[i], so a session sees them renumbered
 * from 0 in the order given, as CUDA_VISIBLE_DEVICES does.  No list means
 * every device in the driver's order. */
#ifndef RGPU_DEVICE_LIST_H
#define RGPU_DEVICE_LIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses LIST into out[0..*n) (at most max entries).  Refuses, with a
 * sentence in err, an empty list or entry, anything but decimal ordinals,
 * a negative one, a repeated one and more than max entries.  0 or -1. */
int rgpu_device_list_parse(const char *list, int *out, int max, int *n, char *err, size_t errlen);

/* Checks a parsed list against the number of devices the driver has: an
 * ordinal at or above count is refused with a sentence naming it.  0 or -1. */
int rgpu_device_list_check(const int *list, int n, int count, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
