/* The process's device list over several servers (issue 19): pure, so the
 * numbering rules are unit-tested without servers. */
#include "rgpu_cudart.h"

int rgpu_devlist_build(rgpu_devlist *l, const int *counts, int n, int max) {
  int total = 0;
  l->n = n;
  for (int i = 0; i < n; i++) {
    int k = counts[i] < 0 ? 0 : counts[i];
    /* Devices past max have no number: the server keeps them, unseen. */
    if (k > max - total) k = max - total;
    l->first[i] = total;
    l->count[i] = k;
    total += k;
  }
  return total;
}

int rgpu_devlist_server_of(const rgpu_devlist *l, int dev) {
  if (dev < 0) return -1;
  for (int i = 0; i < l->n; i++)
    if (dev - l->first[i] < l->count[i] && dev >= l->first[i]) return i;
  return -1;
}
