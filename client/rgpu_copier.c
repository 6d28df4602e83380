/* One memcpy at a time on a thread of its own: see rgpu_copier.h. */
#include "rgpu_copier.h"

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_mutex.h"
#include "rgpu_thread_name.h"

struct rgpu_copier {
  /* A leaf: taken under the client's write lock by client_write, alone by
   * the copier thread (order: rgpu_client_internal.h). */
  rgpu_mutex mu;
  pthread_cond_t cv;
  pthread_t th;
  struct iovec dst[RGPU_COPIER_MAX_SEGS];
  int ndst;
  const void *src;
  int busy; /* a copy was handed over and is not finished */
  int stop;
};

static void *copier_main(void *arg) {
  rgpu_thread_name("rgpu-copier");
  rgpu_copier *cp = arg;
  rgpu_mutex_lock(&cp->mu);
  for (;;) {
    while (!cp->busy && !cp->stop) rgpu_mutex_cond_wait(&cp->cv, &cp->mu);
    if (!cp->busy) break;
    /* start() does not touch the fields while busy is set. */
    const uint8_t *src = cp->src;
    int ndst = cp->ndst;
    rgpu_mutex_unlock(&cp->mu);
    for (int i = 0; i < ndst; i++) {
      memcpy(cp->dst[i].iov_base, src, cp->dst[i].iov_len);
      src += cp->dst[i].iov_len;
    }
    rgpu_mutex_lock(&cp->mu);
    cp->busy = 0;
    pthread_cond_broadcast(&cp->cv);
  }
  rgpu_mutex_unlock(&cp->mu);
  return NULL;
}

rgpu_copier *rgpu_copier_new(void) {
  rgpu_copier *cp = calloc(1, sizeof *cp);
  if (!cp) return NULL;
  rgpu_mutex_init(&cp->mu);
  pthread_cond_init(&cp->cv, NULL);
  if (pthread_create(&cp->th, NULL, copier_main, cp)) {
    pthread_cond_destroy(&cp->cv);
    rgpu_mutex_destroy(&cp->mu);
    free(cp);
    return NULL;
  }
  return cp;
}

void rgpu_copier_free(rgpu_copier *cp) {
  if (!cp) return;
  rgpu_copier_wait(cp);
  rgpu_mutex_lock(&cp->mu);
  cp->stop = 1;
  pthread_cond_broadcast(&cp->cv);
  rgpu_mutex_unlock(&cp->mu);
  pthread_join(cp->th, NULL);
  pthread_cond_destroy(&cp->cv);
  rgpu_mutex_destroy(&cp->mu);
  free(cp);
}

void rgpu_copier_start(rgpu_copier *cp, const struct iovec *dst, int ndst, const void *src) {
  assert(ndst >= 1 && ndst <= RGPU_COPIER_MAX_SEGS);
  rgpu_mutex_lock(&cp->mu);
  while (cp->busy) rgpu_mutex_cond_wait(&cp->cv, &cp->mu);
  memcpy(cp->dst, dst, (size_t)ndst * sizeof *dst);
  cp->ndst = ndst;
  cp->src = src;
  cp->busy = 1;
  pthread_cond_broadcast(&cp->cv);
  rgpu_mutex_unlock(&cp->mu);
}

void rgpu_copier_wait(rgpu_copier *cp) {
  rgpu_mutex_lock(&cp->mu);
  while (cp->busy) rgpu_mutex_cond_wait(&cp->cv, &cp->mu);
  rgpu_mutex_unlock(&cp->mu);
}
